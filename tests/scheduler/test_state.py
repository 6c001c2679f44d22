"""The in-memory pass state: transactions undo exactly, the ledger matches its definition."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import Pass
from scheduler.index import FreeIndex
from scheduler.model import Quota, Team
from scheduler.placement import DOMAIN, take
from scheduler.quota import Ledger, contribution
from scheduler.state import Transaction
from tests.scheduler.helpers import Cluster, examples


def busy_pass():
    c = Cluster().nodes_(4, per_block=2)
    c.team("a", nominal=8, cohort="c").team("b", nominal=16, cohort="c", lending_limit=4)
    c.run(10, "a", on={"n0": 4, "n1": 4}, per_worker=4)
    c.run(11, "b", on={"n2": 8})
    return Pass(c.snapshot())


def state_of(p):
    pool = p.pools["h100"]
    ix = pool.index
    books = {name: (dict(b.usage), p.ledger.share(b)) for name, b in p.ledger.books.items()}
    return (
        list(ix.free),
        ix.total,
        list(ix.cnt),
        [list(s) for s in ix.dslots],
        list(ix.dfree),
        dict(p.ledger.slack),
        books,
    )


def test_rollback_restores_gpus_usage_slack_and_shares():
    p = busy_pass()
    before = state_of(p)
    tx = Transaction()
    pool = p.pools["h100"]
    a, b = p.ledger.book("a"), p.ledger.book("b")
    for r in p.running:  # release every running job, as a preemption simulation does
        for node, k in r.nodes:
            tx.give(pool.index, node, k)
        tx.add(p.ledger, r.book, "h100", -r.job.gpus)
    tx.take(pool.index, 3, 8)
    tx.add(p.ledger, a, "h100", 8)
    assert state_of(p) != before
    assert p.ledger.share(a) != before[-1]["a"][1] or p.ledger.share(b) != before[-1]["b"][1]
    tx.rollback()
    assert state_of(p) == before


def test_a_gang_that_cannot_complete_is_undone():
    p = busy_pass()
    pool = p.pools["h100"]
    before = state_of(p)
    tx = Transaction()
    tx.take(pool.index, 3, 1)  # an earlier change in the same transaction survives
    mark_state = state_of(p)
    assert take(pool.index, (DOMAIN, 0), 3, 8, tx) is None  # block 0 has no room for 3 x 8
    assert state_of(p) == mark_state
    tx.rollback()
    assert state_of(p) == before


def allowed(team, teams, usage, g):
    """The definition: within nominal + borrowing limit, and borrowing only idle lendable quota."""
    q = team.quotas.get("h100", Quota(0))
    limit = (
        q.nominal
        if team.cohort is None
        else (float("inf") if q.borrowing_limit is None else q.nominal + q.borrowing_limit)
    )
    if usage[team.name] + g > limit:
        return False
    if team.cohort is None:
        return True

    def slack(extra):
        return sum(
            contribution(
                t.quotas.get("h100", Quota(0)), usage[t.name] + (extra if t is team else 0)
            )
            for t in teams
            if t.cohort == team.cohort
        )

    return slack(g) >= 0 or slack(g) == slack(0)


quotas = st.builds(
    Quota, st.integers(0, 12), st.none() | st.integers(0, 6), st.none() | st.integers(0, 12)
)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(quotas, st.sampled_from([None, "c"]), st.integers(0, 20)), min_size=1, max_size=4
    )
)
def test_headroom_is_the_largest_allowed_admission(specs):
    teams = [Team(f"t{i}", 1.0, cohort, {"h100": q}) for i, (q, cohort, _) in enumerate(specs)]
    usage = {t.name: u for t, (_, _, u) in zip(teams, specs, strict=True)}
    ledger = Ledger(teams, 3600.0)
    for t in teams:
        ledger.add(ledger.book(t.name), "h100", usage[t.name])
    for t in teams:
        room = ledger.headroom(ledger.book(t.name), "h100")
        for g in range(1, 40):
            assert allowed(t, teams, usage, g) == (g <= room), (t.name, g, room)


def _summary(ix):
    """Everything a placement question reads from an index, and its answers."""
    shapes = [(w, q) for w in (1, 2, 3) for q in (1, 2, 4, 8)]
    return (
        list(ix.free),
        ix.total,
        list(ix.cnt),
        [list(s) for s in ix.dslots],
        list(ix.dfree),
        [ix.best_node(k) for k in range(1, ix.cap + 1)],
        [ix.best_domain(w, q) for w, q in shapes],
    )


@given(st.data())
@settings(max_examples=examples(150), deadline=None)
def test_the_future_index_is_free_now_plus_each_nodes_surplus(data):
    """Stops.future, kept in step with the pool's index, stop by stop and reservation by
    reservation, answers as the index built afresh from free + surplus would; and rule
    2's view (Transaction.view) is undone with the changes made in it."""
    c = Cluster().nodes_(6, per_block=3)
    c.team("a", nominal=48)
    jid = 0
    for n in range(6):
        left = 8 - data.draw(st.integers(0, 3), label=f"free on n{n}")
        while left:
            k = data.draw(st.integers(1, left))
            c.run(jid := jid + 1, "a", on={f"n{n}": k})
            left -= k
    p = Pass(c.snapshot())
    pool = p.pools["h100"]
    stops = p.stops(pool)
    real, taken = pool.index, {}
    todo = list(p.running)
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        op = data.draw(st.sampled_from(["take", "give", "stop", "reserve", "look"]))
        node = data.draw(st.integers(0, 5), label="node")
        if op == "take" and real.free[node]:
            k = data.draw(st.integers(1, real.free[node]))
            real.take(node, k)
            taken[node] = taken.get(node, 0) + k
        elif op == "give" and taken.get(node):
            k = data.draw(st.integers(1, taken[node]))
            real.give(node, k)
            taken[node] -= k
        elif op == "stop" and todo:
            stops.add(todo.pop(data.draw(st.integers(0, len(todo) - 1))))
        elif op == "reserve" and stops.surplus(node) + real.free[node]:
            k = data.draw(st.integers(1, stops.surplus(node) + real.free[node]))
            stops.reserve(1000 + jid, {node: k})
            jid += 1
        elif op == "look":
            expected = [real.free[n] + stops.surplus(n) for n in range(6)]
            fresh = FreeIndex(expected, real.dom, len(real.dfree), real.cap)
            future = stops.future()
            assert _summary(future) == _summary(fresh)
            before = _summary(real)
            tx = Transaction()
            tx.view(pool, future)
            assert pool.index is future
            if future.free[node]:
                tx.take(pool.index, node, future.free[node])
            tx.rollback()
            assert pool.index is real and _summary(real) == before
            assert _summary(future) == _summary(fresh)
