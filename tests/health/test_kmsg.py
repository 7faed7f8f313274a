"""slurmkit.health.checks.kmsg function by function: PCI addresses, record parsing, the boot time and
the non-blocking /dev/kmsg reader (a scripted stand-in for the device). Written to kill the
mutants etc/dev/mutation.sh found surviving (docs/testing.md); the 60 s "fallen off the
bus" window is pinned in test_node_rules.py."""

from __future__ import annotations

import errno
import time

import pytest

from slurmkit.health.checks import kmsg


@pytest.mark.parametrize(
    "bus_id, short",
    [
        ("00000000:9A:00.0", "0000:9a:00"),
        ("0000:18:00.0", "0000:18:00"),
        ("0:1a:00.0", "0000:1a:00"),  # a short domain is padded with zeros on the left
        ("123456:1a:00.0", "3456:1a:00"),  # the last four digits of a long one
        ("00000001:3B:00.1", "0001:3b:00"),
    ],
)
def test_short_pci(bus_id, short):
    assert kmsg.short_pci(bus_id) == short


def test_an_xid_line_without_details():
    assert kmsg.parse_message("NVRM: Xid (PCI:0000:18:00): 79") == ("0000:18:00", 79, "", False)
    assert kmsg.parse_message("NVRM: Xid (0000:AB:00): 13, pid=1 ") == ("0000:ab:00", 13, "pid=1", False)


@pytest.mark.parametrize(
    "message, pci",
    [
        ("NVRM: GPU 29:00.0: GPU has fallen off the bus.", "0000:29:00"),
        ("NVRM: GPU 0001:29:00.0: GPU has fallen off the bus.", "0001:29:00"),
        ("NVRM: GPU 00000002:29:00.0: GPU has fallen off the bus.", "0002:29:00"),
        ("NVRM: GPU 123456:29:00.0: GPU has fallen off the bus.", "3456:29:00"),
        ("NVRM: GPU at PCI:0000:B3:00: GPU has fallen off the bus.", "0000:b3:00"),
    ],
)
def test_fallen_off_the_bus_addresses(message, pci):
    got = kmsg.parse_message(message)
    assert got is not None and got[0] == pci and got[1] == kmsg.XID_FALLEN_OFF_THE_BUS and got[3] is True


def test_fallen_off_the_bus_text_joins_its_lines_with_single_spaces():
    message = (
        "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5)\\x0a   installed in this system has\n"
        "  fallen off the bus and is not responding to commands."
    )
    pci, xid, text, from_text = kmsg.parse_message(message)
    assert (pci, xid, from_text) == ("0000:b3:00", 79, True)
    assert text == (
        "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
        "fallen off the bus and is not responding to commands."
    )


def test_unrelated_messages_are_not_xids():
    assert kmsg.parse_message("usb 1-1: new device") is None
    assert kmsg.xid_records(["4,1,5000000,-;usb 1-1: new device"], 1000.0) == []


def test_a_record_splits_at_the_first_semicolon():
    rec = "6,1,5000000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=1; name=a;b"
    assert kmsg.xid_records([rec], 1000.0) == [(1005.0, "0000:18:00", 13, "pid=1; name=a;b")]


@pytest.mark.parametrize("head", ["6,1", "6,1,notanumber,-", ""])
def test_a_record_with_a_broken_header(head):
    assert kmsg.xid_records([f"{head};NVRM: Xid (PCI:0000:18:00): 13"], 1000.0) == []


def test_a_record_without_a_header():
    assert kmsg.xid_records(["NVRM: Xid (PCI:0000:18:00): 13"], 1000.0) == []


def test_a_fallen_off_record_is_four_fields():
    rec = "3,2,2500000,-;NVRM: GPU 0000:29:00.0: GPU has fallen off the bus."
    assert kmsg.xid_records([rec], 10.0) == [
        (
            12.5,
            "0000:29:00",
            79,
            "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.",
        )
    ]


def test_boot_time_from_proc_stat():
    uptime = float(open("/proc/uptime").read().split()[0])
    assert kmsg.boot_time() == pytest.approx(time.time() - uptime, abs=2.0)
    assert float(kmsg.boot_time()).is_integer()  # btime is whole seconds


def test_boot_time_without_btime_falls_back_to_uptime(monkeypatch):
    import builtins

    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/stat":
            import io

            return io.StringIO("cpu  1 2 3\nintr 5\n")
        if path == "/proc/uptime":
            import io

            return io.StringIO("100.50 200.00\n")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert kmsg.boot_time() == pytest.approx(time.time() - 100.5, abs=1.0)


class FakeKmsg:
    """os.open/os.read/os.close for /dev/kmsg: one scripted answer per read."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.opened = []
        self.closed = []
        self.reads = 0

    def open(self, path, flags):
        self.opened.append((path, flags))
        return 99

    def read(self, fd, n):
        assert fd == 99 and n == 8192
        self.reads += 1
        if not self.answers:
            raise BlockingIOError(errno.EAGAIN, "again")
        a = self.answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a

    def close(self, fd):
        self.closed.append(fd)


@pytest.fixture
def fake_kmsg(monkeypatch):
    def make(answers):
        fake = FakeKmsg(answers)
        monkeypatch.setattr(kmsg.os, "open", fake.open)
        monkeypatch.setattr(kmsg.os, "read", fake.read)
        monkeypatch.setattr(kmsg.os, "close", fake.close)
        return fake

    return make


def test_read_kmsg_records_one_record_per_read_until_eagain(fake_kmsg):
    fake = fake_kmsg([b"6,1,1,-;a\n", b"6,2,2,-;b\xff\n"])
    assert kmsg.read_kmsg_records("/dev/kmsg") == ["6,1,1,-;a", "6,2,2,-;b\ufffd"]
    assert fake.opened == [("/dev/kmsg", kmsg.os.O_RDONLY | kmsg.os.O_NONBLOCK)]
    assert fake.closed == [99]


def test_read_kmsg_records_skips_overwritten_records(fake_kmsg):
    fake = fake_kmsg([b"6,1,1,-;a\n", OSError(errno.EPIPE, "Broken pipe"), b"6,3,3,-;c\n"])
    assert kmsg.read_kmsg_records() == ["6,1,1,-;a", "6,3,3,-;c"]
    assert fake.closed == [99]


def test_read_kmsg_records_stops_on_another_error_or_the_end(fake_kmsg):
    fake_kmsg([b"6,1,1,-;a\n", OSError(errno.EIO, "I/O error"), b"6,3,3,-;c\n"])
    assert kmsg.read_kmsg_records() == ["6,1,1,-;a"]
    fake_kmsg([b"6,1,1,-;a\n", b"", b"6,3,3,-;c\n"])
    assert kmsg.read_kmsg_records() == ["6,1,1,-;a"]


def test_read_kmsg_records_stops_at_max_records(fake_kmsg):
    fake = fake_kmsg([b"r%d\n" % i for i in range(10)])
    assert kmsg.read_kmsg_records(max_records=3) == ["r0", "r1", "r2"]
    assert fake.reads == 3
    fake = fake_kmsg([b"r%d\n" % i for i in range(10)])
    assert len(kmsg.read_kmsg_records()) == 10


def test_read_kmsg_records_of_a_missing_device(tmp_path):
    assert kmsg.read_kmsg_records(str(tmp_path / "no-kmsg")) == []


def test_short_pci_pads_a_short_domain_on_the_left():
    assert kmsg.short_pci("1:1a:00.0") == "0001:1a:00"


def test_read_kmsg_records_strips_only_the_newline_and_opens_dev_kmsg(fake_kmsg):
    fake = fake_kmsg([b"6,1,1,-;ends with X\n", b"6,2,2,-;trailing space \n"])
    assert kmsg.read_kmsg_records() == ["6,1,1,-;ends with X", "6,2,2,-;trailing space "]
    assert fake.opened[0][0] == "/dev/kmsg"
