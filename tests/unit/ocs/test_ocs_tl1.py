"""TL1 framing and the client's demultiplexing (DESIGN §5)."""

import pytest

from mfctl.ocs import tl1
from mfctl.ocs.client import TL1Client, TL1ConnectionError, TL1Deny, TL1Timeout

COMPLD = '\r\n\n   OCS1 26-11-29 10:00:00\r\nM  7 COMPLD\r\n   "1,385"\r\n   "4,388"\r\n;\r\n'
DENY = '\r\n\n   OCS1 26-11-29 10:00:00\r\nM  8 DENY\r\n   SNVS\r\n   /* port 1 already connected to 385 */\r\n;\r\n'
ALARM = '\r\n\n   OCS1 26-11-29 10:00:00\r\n** 17 REPT ALM OCS\r\n   "1:MJ,LOS,SA,,,NEND,RCV:\\"Loss of light\\""\r\n;\r\n'


def test_encode_and_aid_lists():
    assert tl1.encode("ent-patch", "12", aid="1&2,385&386") == b"ENT-PATCH::1&2,385&386:12;"
    assert tl1.encode("RTRV-EQPT", "3", aid="SYSTEM", params="PARAMETER=SIZE") == b"RTRV-EQPT::SYSTEM:3::PARAMETER=SIZE;"
    assert tl1.format_aid([1, 2, 3, 4, 7, 9, 10]) == "1&&4&7&9&10"
    assert tl1.parse_aid("1&&4&7&9&10") == [1, 2, 3, 4, 7, 9, 10]
    with pytest.raises(ValueError):
        tl1.encode("RTRV-HDR", "toolong7")


def test_decoder_compld_deny_alarm_ack_and_continuation():
    d = tl1.Decoder()
    items = d.feed(ALARM + "IP 8\r\n<" + DENY[:20])
    assert isinstance(items[0], tl1.Autonomous) and items[0].atag == 17 and items[0].almcde == "**"
    assert isinstance(items[1], tl1.Ack) and items[1].ctag == "8"
    assert len(items) == 2  # DENY is incomplete so far
    items = d.feed(DENY[20:] + COMPLD)
    deny, ok = items
    assert deny.code == "DENY" and deny.error_code == "SNVS" and deny.comments == ["port 1 already connected to 385"]
    assert ok.code == "COMPLD" and ok.ctag == "7" and ok.lines == ["1,385", "4,388"] and ok.sid == "OCS1"
    more = tl1.format_reply("S", "26-11-29 10:00:00", "9", "COMPLD", ["1,2"], more=True)
    last = tl1.format_reply("S", "26-11-29 10:00:00", "9", "COMPLD", ["3,4"])
    a, b = d.feed(more + last)
    assert a.more and not b.more and a.lines == ["1,2"] and b.lines == ["3,4"]


def test_decoder_never_raises_on_garbage():
    d = tl1.Decoder()
    items = d.feed("\x07#@!noise\r\n;\r\n" + "\xff\xfe\r\n>\r\n")
    assert all(isinstance(i, tl1.Garbage) for i in items)


class FakeStream:
    """Replies scripted per command; records what was written."""

    name = "fake"

    def __init__(self, script):
        self.script = list(script)
        self.written = []
        self.pending = b""

    def write(self, data):
        self.written.append(data.decode())
        ctag = data.decode().split(":")[3].rstrip(";")
        step = self.script.pop(0)
        if step == "dead":
            self.pending = None
            return
        self.pending += step.replace("{ctag}", ctag).encode()

    def read(self, timeout):
        if self.pending is None:
            raise ConnectionError("link died")
        out, self.pending = self.pending[:7], self.pending[7:]  # dribble bytes
        return out

    def close(self):
        pass


def reply(code="COMPLD", lines=(), ctag="{ctag}", **kw):
    return tl1.format_reply("OCS1", "26-11-29 10:00:00", ctag, code, list(lines), **kw)


def test_client_matches_ctag_queues_alarms_and_skips_stale_replies():
    stale = reply(lines=["99,999"], ctag="77")
    s = FakeStream([ALARM + stale + "IP {ctag}\r\n<" + reply(lines=["1,385"])])
    c = TL1Client(s, command_timeout=2)
    r = c.command("RTRV-PATCH")
    assert r.lines == ["1,385"]
    assert [a.atag for a in c.autonomous] == [17]


def test_client_raises_typed_deny_with_code():
    s = FakeStream([reply("DENY", error_code="IIAC", comment="port 999 out of range")])
    c = TL1Client(s, command_timeout=2)
    with pytest.raises(TL1Deny) as e:
        c.command("ENT-PATCH", aid="999,1000")
    assert e.value.code == "IIAC" and "out of range" in str(e.value) and e.value.exit_code == 1


def test_client_timeout_names_the_limit_and_last_read():
    s = FakeStream(['\r\n\n   OCS1 26-11-29 10:00:00\r\nM  1 COMP'])
    c = TL1Client(s, command_timeout=0.3)
    with pytest.raises(TL1Timeout) as e:
        c.command("RTRV-HDR")
    assert "0.3 s" in str(e.value) and "COMP" in str(e.value) and e.value.exit_code == 4


def test_client_dead_link_is_a_connection_error():
    c = TL1Client(FakeStream(["dead"]), command_timeout=1)
    with pytest.raises(TL1ConnectionError):
        c.command("RTRV-HDR")


def test_partial_completion_is_its_own_typed_error():
    from mfctl.ocs.client import TL1Partial

    s = FakeStream([reply("PRTL", lines=["2,50:SROF"], comment="1 of 2 done")])
    with pytest.raises(TL1Partial) as e:
        TL1Client(s, command_timeout=2).command("ENT-PATCH", aid="1&2,49&50")
    assert e.value.reply.lines == ["2,50:SROF"]


def test_atag_gaps_are_detected():
    a1 = tl1.format_autonomous("S", "26-11-29 10:00:00", "* ", 4, "REPT EVT OCS", ["x"])
    a2 = tl1.format_autonomous("S", "26-11-29 10:00:00", "* ", 7, "REPT EVT OCS", ["y"])
    s = FakeStream([a1 + a2 + reply()])
    c = TL1Client(s, command_timeout=2)
    c.command("RTRV-HDR")
    assert c.atag_gaps == [(5, 7)] and [a.atag for a in c.autonomous] == [4, 7]
