"""Tests of :mod:`subgraph.properties.tvm.runtime.threads`: the pool's process settings, the
per-call fit to the machine's load, a stream's fixed share. Counts and settings, never times."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

pytest.importorskip("tvm", reason="needs apache-tvm")  # the backend's modules import tvm at their tops

from subgraph.properties.tvm.build.compiler import compile_graph
from subgraph.properties.tvm.runtime import threads
from tests.properties.tvm.tvm_graphs import linear_graph

pytestmark = pytest.mark.tvm

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TVM_VARIABLES = ("TVM_NUM_THREADS", "TVM_BIND_THREADS", "TVM_THREAD_POOL_SPIN_COUNT", threads._OURS)


def in_new_thread(work):
    """``work()``'s result, run on a fresh thread (TVM's pool and ours are per thread)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def run_script(body: str, **env: str) -> list[str]:
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {HERE!r})
        import numpy as np
        from tvm_graphs import linear_graph
        from subgraph.properties.tvm.build.compiler import compile_graph
    """) + textwrap.dedent(body)
    clean = {k: v for k, v in os.environ.items() if k not in TVM_VARIABLES}
    out = subprocess.run([sys.executable, "-c", script], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_parallel_loops_use_every_cpu_by_default(tmp_path):
    """TVM alone would start one thread on a 2-vCPU x86 machine (it halves for hyper-threading)."""
    out = run_script(f"""
        fn = compile_graph(linear_graph(), cache_dir={str(tmp_path)!r})
        before = set(os.listdir("/proc/self/task"))
        fn(np.ones((96, 64), np.float32))
        # threads the call started (the build's worker thread may still be exiting: not a difference of counts)
        print(os.environ["TVM_NUM_THREADS"], len(set(os.listdir("/proc/self/task")) - before))
    """)
    cpus = len(os.sched_getaffinity(0))
    assert out == [str(cpus), str(cpus - 1)]  # the caller plus cpus - 1 workers


_AFFINITIES = """
    fn = compile_graph(linear_graph(), cache_dir={cache!r})
    fn(np.ones((96, 64), np.float32))
    mine = os.sched_getaffinity(0)
    pinned = sorted(t for t in os.listdir("/proc/self/task") if os.sched_getaffinity(int(t)) != mine)
    print(os.environ["TVM_BIND_THREADS"], len(pinned))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
@pytest.mark.parametrize("user, expected", [(None, ["0", "0"]), ("1", ["1", "1"])],
                         ids=["default: unpinned", "the user's TVM_BIND_THREADS=1 wins"])
def test_pool_workers_are_not_pinned_to_cores_unless_the_user_says(tmp_path, user, expected):
    """A worker pinned to a core another process keeps busy stalls every parallel loop."""
    env = {"TVM_BIND_THREADS": user} if user is not None else {}
    out = run_script(_AFFINITIES.format(cache=str(tmp_path)), **env)
    assert out == expected  # TVM pins its one worker when told to (the caller stays free)


@pytest.mark.parametrize("env, expected", [
    ({}, [str(threads.SPIN_COUNT), "adapts"]),
    ({"TVM_THREAD_POOL_SPIN_COUNT": "0"}, ["0", "adapts"]),
    ({"TVM_NUM_THREADS": "1"}, [str(threads.SPIN_COUNT), "fixed"]),
    ({"TVM_BIND_THREADS": "1"}, [str(threads.SPIN_COUNT), "fixed"]),
], ids=["default", "the user's spin count wins", "the user's thread count is fixed", "pinned threads are fixed"])
def test_process_settings_keep_what_the_user_set(tmp_path, env, expected):
    out = run_script(f"""
        from subgraph.properties.tvm.runtime import threads
        compile_graph(linear_graph(), cache_dir={str(tmp_path)!r})(np.ones((96, 64), np.float32))
        print(os.environ["TVM_THREAD_POOL_SPIN_COUNT"], "fixed" if threads._pool().fixed else "adapts")
    """, **env)
    assert out == expected


def test_a_process_started_by_ours_tells_our_thread_count_from_the_users(tmp_path):
    """Children inherit TVM_NUM_THREADS as we set it: theirs still adapts."""
    inherited = {"TVM_NUM_THREADS": str(len(os.sched_getaffinity(0))), threads._OURS: str(len(os.sched_getaffinity(0)))}
    out = run_script(f"""
        from subgraph.properties.tvm.runtime import threads
        compile_graph(linear_graph(), cache_dir={str(tmp_path)!r})
        print("fixed" if threads._pool().fixed else "adapts")
    """, **inherited)
    assert out == ["adapts"]


@pytest.fixture
def machine(monkeypatch):
    """A machine of 4 CPUs whose runnable count the test sets; the pool is 4 threads
    (thread-local, so each test works on a fresh thread)."""
    state = {"runnable": 1, "blas": 0, "read": 0.0}

    def reading():  # a fresh reading at each call, later than any change of count
        state["read"] = threads.time.monotonic() + 1.0
        return state["read"], state["runnable"]
    monkeypatch.setattr(threads, "load_reading", reading)
    monkeypatch.setattr(threads, "spinning_workers", lambda: state["blas"])
    monkeypatch.setattr(threads, "_MACHINE_CPUS", 4)
    monkeypatch.setattr(threads, "_user_fixed", False)
    monkeypatch.setenv("TVM_NUM_THREADS", "4")
    return state


def call(machine, runnable):
    """One call as TVMFunction makes it: the count chosen before, the load read after."""
    threads.fit_to_load()
    used = threads.thread_count()
    machine["runnable"] = runnable
    threads.note_load()
    return used


def test_each_call_uses_the_cores_the_machine_had_free_after_the_last(machine):
    def counts():
        # runnable counts include this thread's pool (its threads in use)
        return [call(machine, runnable) for runnable in (5, 7, 9, 2, 1, None, 4)] + [threads.thread_count()]
    # first call: every thread; then 4 own + 1 other -> 3; 3 own + 4 others -> 1 (at least one);
    # 1 + 8 -> 1; 1 + 1 -> 3; 3 own, none other -> 4; no count (not Linux): unchanged
    assert in_new_thread(counts) == [4, 3, 1, 1, 3, 4, 4, 4]


def test_the_numpy_paths_spinning_blas_workers_are_not_load(machine):
    """A HETERO model's NUMPY subgraph leaves OpenBLAS's workers yielding for ~0.1 s: ours."""
    def counts():
        machine["blas"] = 2
        first = call(machine, 6)  # 4 own + 2 BLAS workers: nothing else
        machine["blas"] = 0
        return [first, call(machine, 6), call(machine, 4)]  # then 2 others: 2 threads
    assert in_new_thread(counts) == [4, 4, 2]


def test_a_reading_from_before_a_change_of_count_is_not_used_again(machine, monkeypatch):
    """Readings stand for 5 ms: one taken at the old count would count this thread's change as load."""
    stale = {"at": 0.0}
    monkeypatch.setattr(threads, "load_reading", lambda: (stale["at"], machine["runnable"]))

    def counts():
        stale["at"] = threads.time.monotonic()
        seen = [call(machine, 5)]  # 4 own + 1 other: 3 next
        seen.append(call(machine, 5))  # the same reading, now at 3: not used again
        return seen + [threads.thread_count()]
    assert in_new_thread(counts) == [4, 3, 3]


def test_a_call_after_a_quiet_spell_reads_the_load_before_it_starts(machine):
    def counts():
        seen = [call(machine, 1)]  # idle after it: every thread next
        machine["runnable"] = 7  # other processes started meanwhile: this thread + 6
        threads._pool().noted_at -= 2 * threads.QUIET
        seen.append(call(machine, 7))  # read before the call: 4 CPUs - 6 others -> one thread
        machine["runnable"] = 1  # idle again, but a call right after another keeps the reading after it
        seen.append(call(machine, 1))
        return seen
    assert in_new_thread(counts) == [4, 1, 1]


def test_a_stream_keeps_its_share_under_any_load(machine):
    def counts():
        threads.use_threads([0, 1])
        seen = [threads.thread_count()]
        for runnable in (9, 1):
            seen.append(call(machine, runnable))
        threads.use_threads(range(8))  # a stream's pool is made at its share: never more after
        return seen + [threads.thread_count(), threads._pool().size]
    assert in_new_thread(counts) == [2, 2, 2, 2, 2]


def test_results_are_the_same_on_one_thread_and_on_all(tmp_path):
    """A loop run inline (one thread, no pool) computes what the pool computes."""
    fn = compile_graph(linear_graph(), cache_dir=str(tmp_path))
    x = np.random.default_rng(0).standard_normal((96, 64)).astype(np.float32)

    def run(count):
        def work():
            threads.use_threads(threads._cpus(count))
            return threads.thread_count(), fn(x)[0]
        return in_new_thread(work)
    (one, single), (many, pooled) = run(1), run(len(os.sched_getaffinity(0)))
    assert one == 1 and many == len(os.sched_getaffinity(0))
    np.testing.assert_array_equal(single, pooled)


def choice_calls(machine, choice, times, calls=24):
    """``calls`` calls of a function with ``choice`` as TVMFunction makes them, each taking
    ``times[count]`` seconds; the counts used."""
    used = []
    for _ in range(calls):
        count, idle = threads.fit_to_load(choice)
        choice.record(count, idle, times[count])
        threads.note_load()
        used.append(count)
    return used


def test_a_function_faster_alone_is_timed_in_pairs_then_kept_to_its_thread(machine):
    choice = threads.ThreadChoice()
    used = in_new_thread(lambda: choice_calls(machine, choice, {1: 70e-6, 4: 84e-6}))
    # the first call warms up; then two pooled, two alone (the second of each timed), five times
    assert used[:9] == [4, 4, 4, 1, 1, 4, 4, 1, 1]
    assert used[21:] == [1, 1, 1] and choice.alone is True


def test_a_function_the_pool_speeds_up_keeps_the_pool(machine):
    choice = threads.ThreadChoice()
    used = in_new_thread(lambda: choice_calls(machine, choice, {1: 80e-6, 4: 75e-6}))  # alone not 1.1x faster
    assert choice.alone is False and used[21:] == [4, 4, 4]


def test_a_clear_winner_is_kept_after_two_timed_calls_of_each_kind(machine):
    fast_pool, fast_alone = threads.ThreadChoice(), threads.ThreadChoice()
    pooled = in_new_thread(lambda: choice_calls(machine, fast_pool, {1: 600e-6, 4: 300e-6}, calls=12))
    alone = in_new_thread(lambda: choice_calls(machine, fast_alone, {1: 50e-6, 4: 100e-6}, calls=12))
    assert fast_pool.alone is False and pooled == [4, 4, 4, 1, 1, 4, 4, 1, 1, 4, 4, 4]
    assert fast_alone.alone is True and alone == [4, 4, 4, 1, 1, 4, 4, 1, 1, 1, 1, 1]


def test_a_long_function_keeps_the_pool_without_ever_running_alone(machine):
    choice = threads.ThreadChoice()
    used = in_new_thread(lambda: choice_calls(machine, choice, {1: 1e-3, 4: 3e-3}))  # 3 ms pooled: long
    assert choice.alone is False and used == [4] * 24


def test_no_function_is_timed_while_the_machine_is_busy_or_in_a_stream(machine):
    def busy():
        machine["runnable"] = 9  # 4 own + 5 others: one thread from the second call on
        return choice_calls(machine, choice, {1: 1e-6, 4: 1.0})
    choice = threads.ThreadChoice()
    assert in_new_thread(busy)[1:] == [1] * 23 and choice.alone is None

    def stream():
        threads.use_threads([0, 1])
        machine["runnable"] = 1
        return choice_calls(machine, streamed, {1: 1e-6, 2: 1.0})
    streamed = threads.ThreadChoice()
    assert in_new_thread(stream) == [2] * 24 and streamed.alone is None


def test_a_compiled_function_runs_where_its_choice_says_and_computes_the_same(machine, tmp_path, monkeypatch):
    fn = compile_graph(linear_graph(), cache_dir=str(tmp_path))
    monkeypatch.setattr(threads, "_user_fixed", False)  # compiling read the fixture's TVM_NUM_THREADS as the user's
    x = np.random.default_rng(0).standard_normal((96, 64)).astype(np.float32)
    reference = in_new_thread(lambda: fn(x)[0])
    assert fn.threads.alone is None  # one call: not timed yet

    def work():
        outs = [fn(x)[0] for _ in range(24)]
        return outs, threads.thread_count()
    outs, count = in_new_thread(work)
    assert fn.threads.alone is not None  # decided by its own calls (which way is the machine's)
    assert count == (1 if fn.threads.alone else 4)
    for out in outs:
        np.testing.assert_array_equal(out, reference)
