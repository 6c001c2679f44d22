"""The agent rotates its node token once it is older than --token-max-age (docs/agent.md,
"Token rotation"): at a beat, the new token saved before it is used, so a lost reply, a
failed save or a crash in between leaves the node a token the portal still accepts."""

from __future__ import annotations

import os
import stat
import time

import pytest

from agents.agent import EXIT_AUTH, ROTATION_SPREAD, Agent, rotation_due_at
from agents.config import AgentConfig
from agents.gpu import FakeGpuBackend
from agents.portal import PortalClient
from agents.runtimes.fake import FakeRuntime
from agents.state import NodeTokenFile
from tests.agents.conftest import wait_until

DAY = 24 * 3600.0


def token_file(tmp_path, token="bnt_good", age_s=0.0) -> NodeTokenFile:
    """The state dir's token file, written `age_s` ago."""
    file = NodeTokenFile(tmp_path / "state" / "node_token")
    file.save(token)
    then = time.time() - age_s
    os.utime(file.path, (then, then))
    return file


def start(start_agent, **overrides):
    return start_agent(runtime=FakeRuntime(), node_token=None, **overrides)


def bearer(request) -> str:
    return request.headers["Authorization"].removeprefix("Bearer ")


def beats_with(portal, token) -> list:
    return [r for r in portal.accepted_heartbeats() if bearer(r) == token]


def test_rotates_once_the_token_is_due_and_not_before(portal, start_agent, tmp_path):
    # gpu-node-07's token is due a little before DAY (rotation_due_at): in a second and a half
    file = token_file(tmp_path, age_s=rotation_due_at(0.0, DAY, "gpu-node-07") - 1.5)
    due = rotation_due_at(file.saved_at(), DAY, "gpu-node-07")
    due_on_the_test_clock = time.monotonic() + (due - time.time())
    start(start_agent, token_max_age_s=DAY)
    (rotation,) = wait_until(portal.rotations, 10, "a rotation")
    assert rotation.at >= due_on_the_test_clock - 0.05  # (mtime's and the clocks' grain)
    assert [r for r in portal.accepted_heartbeats() if r.at < due_on_the_test_clock]
    assert bearer(rotation) == "bnt_good"
    assert "bootstrap_token" not in rotation.body
    assert rotation.body["hostname"] == "gpu-node-07" and len(rotation.body["gpus"]) == 2
    wait_until(lambda: beats_with(portal, "bnt_rotated_1"), 10, "a beat with the new token")
    assert file.load() == "bnt_rotated_1"
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert "bnt_good" not in portal.node_tokens  # the portal retired it on first use
    time.sleep(0.3)
    assert len(portal.rotations()) == 1  # the new token is young: not again


def test_the_new_token_is_saved_before_it_is_used(portal, start_agent, tmp_path, monkeypatch):
    file = token_file(tmp_path, age_s=2 * DAY)
    used_before_save = []

    def save(self, token):
        used_before_save.extend(r for r in portal.heartbeats() if bearer(r) == token)
        original(self, token)

    original = NodeTokenFile.save
    monkeypatch.setattr(NodeTokenFile, "save", save)
    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: beats_with(portal, "bnt_rotated_1"), 10, "a beat with the new token")
    assert used_before_save == []
    assert file.load() == "bnt_rotated_1"


class Died(BaseException):
    """The agent's process ends here (a kill -9, a power cut)."""


def test_an_agent_that_dies_before_saving_restarts_with_the_old_token(
    portal, start_agent, tmp_path, monkeypatch
):
    """The portal rotated, the agent died before the new token reached the file: the next
    agent starts with the old token, which still works, and rotates again with it."""
    file = token_file(tmp_path, age_s=2 * DAY)
    config = AgentConfig(
        portal_url=portal.url,
        state_dir=tmp_path / "state",
        heartbeat_interval_s=0.1,
        hostname="gpu-node-07",
        token_max_age_s=DAY,
    )
    dying = Agent(
        config,
        gpus=FakeGpuBackend(2, node=config.hostname),
        runtime=FakeRuntime(),
        portal=PortalClient(portal.url, timeout_s=2.0),
        token_file=NodeTokenFile(config.token_path),
    )

    def die(self, token):
        raise Died

    with monkeypatch.context() as patch:
        patch.setattr(NodeTokenFile, "save", die)
        with pytest.raises(Died):
            dying.run()
    assert portal.unproven_token == "bnt_rotated_1"  # the portal rotated; the agent is gone
    assert file.load() == "bnt_good"

    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: beats_with(portal, "bnt_good"), 10, "a beat with the old token")
    wait_until(lambda: beats_with(portal, "bnt_rotated_2"), 10, "a beat with the new token")
    assert file.load() == "bnt_rotated_2"
    assert [bearer(r) for r in portal.rotations()] == ["bnt_good", "bnt_good"]
    assert portal.node_tokens == {"bnt_rotated_2"}  # the lost one and the old one retired


def test_a_failed_save_keeps_the_old_token_and_tries_again(
    portal, start_agent, tmp_path, monkeypatch, caplog
):
    file = token_file(tmp_path, age_s=2 * DAY)
    original, failures = NodeTokenFile.save, []

    def full_disk(self, token):
        if not failures:
            failures.append(token)
            raise OSError(28, "No space left on device")
        original(self, token)

    monkeypatch.setattr(NodeTokenFile, "save", full_disk)
    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: beats_with(portal, "bnt_rotated_2"), 10, "a beat with the new token")
    assert failures == ["bnt_rotated_1"] and file.load() == "bnt_rotated_2"
    assert beats_with(portal, "bnt_rotated_1") == []  # never used: it was never saved
    assert [bearer(r) for r in portal.rotations()] == ["bnt_good", "bnt_good"]
    assert "cannot save the new node token" in caplog.text and "No space left" in caplog.text


@pytest.mark.parametrize("failure", [503, "lost"])
def test_a_transient_failure_is_retried_with_backoff_and_the_beats_go_on(
    portal, start_agent, tmp_path, failure
):
    file = token_file(tmp_path, age_s=2 * DAY)
    for _ in range(2):
        portal.script_rotation(failure)
    start(start_agent, token_max_age_s=DAY)
    new = "bnt_rotated_1" if failure == 503 else "bnt_rotated_3"  # "lost": rotated thrice
    wait_until(lambda: beats_with(portal, new), 10, "a beat with the new token")
    rotations = portal.rotations()
    assert len(rotations) == 3 and {bearer(r) for r in rotations} == {"bnt_good"}
    first, last = rotations[0].at, rotations[-1].at
    assert [r for r in beats_with(portal, "bnt_good") if first < r.at < last]  # beats went on
    assert file.load() == new
    assert portal.node_tokens == {new}  # the old one retired, the lost ones never usable


def test_a_refused_rotation_is_logged_and_the_old_token_kept(portal, start_agent, tmp_path, caplog):
    file = token_file(tmp_path, age_s=2 * DAY)
    portal.script_rotation(409)
    start(start_agent, token_max_age_s=DAY)
    wait_until(portal.rotations, 10, "a rotation")
    beats = len(portal.accepted_heartbeats())
    wait_until(lambda: len(portal.accepted_heartbeats()) > beats + 3, 10, "more beats")
    assert len(portal.rotations()) == 1  # not again at every beat
    assert file.load() == "bnt_good" and beats_with(portal, "bnt_good")
    assert "the portal refused to rotate the node token" in caplog.text


def test_a_rotation_refused_as_unauthenticated_takes_the_token_rejected_path(
    portal, start_agent, tmp_path, caplog
):
    token_file(tmp_path, age_s=2 * DAY)
    portal.script_rotation(401)
    running = start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: running.exit_code is not None, 15, "the agent to exit")
    assert running.exit_code == EXIT_AUTH
    assert "rejected this node's token" in caplog.text


def test_a_token_from_the_command_line_is_never_rotated_and_it_says_so_once(
    portal, start_agent, tmp_path, caplog
):
    token_file(tmp_path, age_s=2 * DAY)  # even with an old file beside it
    start_agent(runtime=FakeRuntime(), token_max_age_s=1.0)  # node_token="bnt_good"
    wait_until(lambda: len(portal.accepted_heartbeats()) >= 5, 10, "five beats")
    assert portal.rotations() == []
    assert caplog.text.count("it is not rotated") == 1


def test_a_max_age_of_0_never_rotates(portal, start_agent, tmp_path):
    token_file(tmp_path, age_s=3650 * DAY)
    start(start_agent, token_max_age_s=0.0)
    wait_until(lambda: len(portal.accepted_heartbeats()) >= 5, 10, "five beats")
    assert portal.rotations() == []


def test_a_token_file_in_a_directory_it_cannot_write_is_not_rotated(
    portal, start_agent, tmp_path, monkeypatch, caplog
):
    """A token the agent could not save would lock the node out once the overlap ends."""
    token_file(tmp_path, age_s=2 * DAY)
    monkeypatch.setattr(NodeTokenFile, "writable", lambda self: False)
    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: len(portal.accepted_heartbeats()) >= 5, 10, "five beats")
    assert portal.rotations() == []
    assert caplog.text.count("the token is not rotated") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any directory")
def test_the_token_file_knows_whether_it_can_be_replaced(tmp_path):
    file = token_file(tmp_path)
    assert file.writable()
    os.chmod(file.path.parent, 0o500)
    try:
        assert not file.writable()
    finally:
        os.chmod(file.path.parent, 0o700)


def test_nodes_registered_together_rotate_spread_over_a_tenth_of_the_max_age():
    """A cluster registered in one go must not rotate in one beat interval: each hostname
    has its own moment, within the last tenth of the max age, the same on every start."""
    saved = 1_000_000.0
    due = [rotation_due_at(saved, 30 * DAY, f"gpu-{i:04d}") for i in range(2000)]
    assert all(saved + 30 * DAY * (1 - ROTATION_SPREAD) <= d <= saved + 30 * DAY for d in due)
    assert max(due) - min(due) > 2.5 * DAY  # spread over nearly the whole tenth (3 days)
    busiest = max(sum(1 for d in due if t <= d < t + 3600) for t in due)
    assert busiest < 100  # of 2,000 nodes, at most a few dozen in any hour
    assert rotation_due_at(saved, 30 * DAY, "gpu-0007") == due[7]


def test_a_disk_that_cannot_take_a_token_is_not_asked_to_rotate(
    portal, start_agent, tmp_path, monkeypatch, caplog
):
    """Each rotation starts the old token's overlap: while a probe write beside the token
    fails (a full disk, a quota), the agent does not send one, and the beats go on."""
    file = token_file(tmp_path, age_s=2 * DAY)
    answers = [False, False]
    monkeypatch.setattr(NodeTokenFile, "can_save", lambda self: answers.pop(0) if answers else True)
    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: beats_with(portal, "bnt_rotated_1"), 15, "a beat with the new token")
    assert [bearer(r) for r in portal.rotations()] == ["bnt_good"]  # one, once it could save
    assert len(beats_with(portal, "bnt_good")) >= 3  # the beats went on meanwhile
    assert file.load() == "bnt_rotated_1"
    assert caplog.text.count("cannot write beside the node token") == 2


def test_the_probe_says_whether_a_save_would_get_through_and_leaves_nothing(tmp_path, monkeypatch):
    file = token_file(tmp_path)
    assert file.can_save() is True
    assert sorted(p.name for p in file.path.parent.iterdir()) == ["node_token"]

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    assert file.can_save() is False
    assert sorted(p.name for p in file.path.parent.iterdir()) == ["node_token"]
    monkeypatch.undo()

    def read_only(self, missing_ok=False):  # a read-only mount refuses even a missing name
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(type(file.path), "unlink", read_only)
    assert file.can_save() is True  # the probe got through; its removal is not the save


def test_a_token_file_dated_in_the_future_is_rotated_at_once(portal, start_agent, tmp_path):
    """A clock that was years ahead when the token was written: its age is unknown, so it
    is rotated now (counting from each start instead would put it off for as long as the
    agent restarts more often than the max age), and the new file is dated right."""
    file = token_file(tmp_path, age_s=-3650 * DAY)
    start(start_agent, token_max_age_s=30 * DAY)
    wait_until(lambda: beats_with(portal, "bnt_rotated_1"), 10, "a beat with the new token")
    assert abs(file.saved_at() - time.time()) < 60
    assert len(portal.rotations()) == 1


def test_the_token_is_saved_with_its_directory_synced_after_the_rename(tmp_path, monkeypatch):
    """Without it a power cut can bring back the directory entry of the old token file
    after the portal retired that token (the new one was used at the next beat). Other
    durable files (stop records) do not pay for it."""
    import agents.state as state

    synced = []
    file = NodeTokenFile(tmp_path / "node_token")
    monkeypatch.setattr(state, "_fsync_dir", lambda path: synced.append((path, file.load())))
    file.save("bnt_x")
    state.write_json(tmp_path / "stop.json", {"a": 1})
    state.write_atomic(tmp_path / "lease", "1\n", durable=False)
    assert synced == [(tmp_path, "bnt_x")]  # once, and after the rename


def test_a_save_that_fails_after_the_rename_still_switches_to_the_new_token(
    portal, start_agent, tmp_path, monkeypatch
):
    """The directory's fsync failed but the file holds the new token: the agent uses it
    (as the next agent would), instead of rotating again and again with the old one."""
    import agents.state as state

    file = token_file(tmp_path, age_s=2 * DAY)
    failed = []

    def failing_dir_sync(path):
        if not failed:
            failed.append(path)
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(state, "_fsync_dir", failing_dir_sync)
    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: beats_with(portal, "bnt_rotated_1"), 10, "a beat with the new token")
    assert failed and file.load() == "bnt_rotated_1" and len(portal.rotations()) == 1


def test_the_rotation_comes_after_the_beats_reply_is_acted_on(
    portal, start_agent, tmp_path, monkeypatch
):
    """A rotation is a portal request (up to the request timeout): the starts and stops
    of the reply that came before it must not wait for it."""
    token_file(tmp_path, age_s=2 * DAY)
    calls = []
    for name in ("_heartbeat", "_converge", "_rotate"):
        original = getattr(Agent, name)

        def traced(self, *args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Agent, name, traced)
    start(start_agent, token_max_age_s=DAY)
    wait_until(lambda: beats_with(portal, "bnt_rotated_1"), 10, "a beat with the new token")
    at = calls.index("_rotate")
    assert calls[at - 2 : at] == ["_heartbeat", "_converge"]
