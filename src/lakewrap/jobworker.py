"""``lakewrap worker``: claims jobs from the queue (:mod:`lakewrap.jobs`) and runs each through the
runner (:func:`lakewrap.scheduler.run` / :func:`~lakewrap.scheduler.resume`), so a job is a run
like any other: atomic steps, retries, the run log. The job's ``run_id`` (chosen when it is claimed)
is the run's id.

* One job at a time per process; ``--concurrency N`` starts N such processes (:func:`supervise`).
* While a job runs, a thread heartbeats it every ``heartbeat`` seconds. Before each claim (and while
  idle), jobs whose heartbeat is older than ``reclaim_after`` are handed back, queued as a resume
  of their run; the next claim finishes them with ``resume`` (what the dead worker committed stays,
  the rest runs). A resume whose run never reached the run log (the worker died while planning) runs
  the job's selection afresh under the same run id.
* SIGTERM/SIGINT: no new claim; the current job may finish for ``grace`` seconds, then its run is
  cancelled (in-flight statements rolled back, the run recorded ``cancelled``) and the job handed
  back with its attempts; the process exits 0.
* A job that was claimed more than ``max_attempts`` times (its workers keep dying) fails.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewrap.errors import LakewrapError, StateError
from lakewrap.jobs import Job, JobQueue, open_queue, worker_name
from lakewrap.redact import redact
from lakewrap.signals import on_signals

Say = Callable[[str], None]


@dataclass
class WorkerOptions:
    heartbeat: float = 5.0  # seconds between heartbeats
    reclaim_after: float = 60.0  # a running job whose heartbeat is older is handed back
    grace: float = 20.0  # after SIGTERM, how long the current job may still run
    once: bool = False  # drain what is queued, then exit
    poll: float = 1.0  # idle: seconds between looks at the queue
    max_attempts: int = 3


@dataclass
class Outcome:
    status: str  # succeeded | failed | cancelled
    run_id: str | None
    error: str | None = None


@dataclass
class Worker:
    root: Path
    opts: WorkerOptions = field(default_factory=WorkerOptions)
    say: Say = lambda line: None
    name: str = field(default_factory=worker_name)
    stop: threading.Event = field(default_factory=threading.Event)
    stop_at: float | None = None
    jobs_done: int = 0

    def request_stop(self) -> None:
        if not self.stop.is_set():
            self.stop_at = time.monotonic()
            self.stop.set()

    def serve(self) -> int:
        """Claim and run jobs until stopped (or, ``once``, until nothing is queued)."""
        with open_queue(self.root) as queue, queue.store.worker_slot():
            with queue.store.setup_lock():
                open_lake(self.root)
            restore = on_signals(self.request_stop)
            try:
                self.say(f"worker {self.name} on {queue.where}")
                while not self.stop.is_set():
                    for back in queue.reclaim(self.opts.reclaim_after):
                        self.say(f"job {back.id} handed back: its heartbeat stopped (run {back.run_id})")
                    job = queue.claim(self.name)
                    if job is None:
                        if self.opts.once:
                            break
                        self.stop.wait(self.opts.poll)
                        continue
                    self.run_job(queue, job)
            finally:
                restore()
        return 0

    def run_job(self, queue: JobQueue, job: Job) -> None:
        if job.attempts > self.opts.max_attempts:
            queue.finish(job.id, "failed", run_id=job.run_id,
                         error=f"claimed {job.attempts} times; its workers stopped before it finished "
                         f"(the limit is {self.opts.max_attempts})")
            self.say(f"job {job.id} failed: gave up after {job.attempts - 1} attempts")
            return
        what = "resume of " + str(job.resume_of) if job.kind == "resume" else describe(job)
        self.say(f"job {job.id} claimed: {what} as run {job.run_id} (attempt {job.attempts})")
        started = time.monotonic()
        cancel: list[Callable[[], None]] = []
        lost = threading.Event()  # the job is no longer ours (reclaimed after a stall)
        done = threading.Event()
        result: list[Outcome] = []

        stopping = threading.Event()  # the run is to stop (handed back, or lost)

        def control(fn: Callable[[], None]) -> None:
            cancel.append(fn)
            if stopping.is_set():  # decided while the run was still being planned
                fn()

        def work() -> None:
            try:
                result.append(run_one(self.root, job, control))
            except BaseException as exc:  # whatever stops a run fails the job, never the worker
                result.append(Outcome("failed", job.run_id, _error_text(self.root, exc)))
            finally:
                done.set()

        def beat() -> None:
            while not done.wait(self.opts.heartbeat):
                try:
                    queue.heartbeat(job.id, self.name)
                except StateError:
                    lost.set()
                    stopping.set()
                    for fn in cancel:
                        fn()
                    return
                except Exception as exc:  # a lost connection: try again next beat
                    self.say(f"job {job.id}: heartbeat failed: {_error_text(self.root, exc)}")

        runner = threading.Thread(target=work, name=f"lakewrap-job-{job.id}", daemon=True)
        beater = threading.Thread(target=beat, name=f"lakewrap-heartbeat-{job.id}", daemon=True)
        runner.start()
        beater.start()
        handed_back = noted = False
        while not done.wait(0.2):
            if self.stop.is_set() and not noted:
                noted = True
                self.say(f"job {job.id}: stop requested; it may run {self.opts.grace:g}s more, then it is handed back")
            if self.stop.is_set() and not handed_back and self.stop_at is not None \
                    and time.monotonic() - self.stop_at >= self.opts.grace:
                handed_back = True  # not short: stop the run where it is, hand the job back
                stopping.set()
                self.say(f"job {job.id}: stopping; its run is cancelled and the job handed back")
                for fn in cancel:
                    fn()
        runner.join()
        beater.join()
        outcome = result[0]
        seconds = time.monotonic() - started
        if lost.is_set():
            self.say(f"job {job.id}: reclaimed by another worker while it ran; left to it")
        elif handed_back and outcome.status != "succeeded":
            queue.release(job.id, self.name)
            self.say(f"job {job.id} handed back after {seconds:.1f}s (run {job.run_id}, resumable)")
        else:
            queue.finish(job.id, outcome.status, run_id=outcome.run_id, error=outcome.error)
            self.jobs_done += 1
            self.say(f"job {job.id} {outcome.status} in {seconds:.1f}s (run {outcome.run_id})"
                     + (f": {outcome.error}" if outcome.error else ""))


def describe(job: Job) -> str:
    sel = " ".join(job.selection) or "(all models)"
    if job.partition:
        return f"run {sel} --partition {job.partition}"
    if job.start:
        return f"run {sel} --start {job.start} --end {job.end}"
    return f"run {sel}"


def run_one(root: Path, job: Job, control: Callable[[Callable[[], None]], None]) -> Outcome:
    """Run ``job`` through the runner; its outcome (never raises for a failed run)."""
    from lakewrap import scheduler

    run_id = job.run_id
    assert run_id is not None  # a claimed job has its run id
    if job.kind == "resume":
        assert job.resume_of is not None
        recorded = recorded_status(root, job.resume_of)
        if recorded == "success":  # its worker stopped after the run finished
            return Outcome("succeeded", job.resume_of)
        if recorded is not None:
            return _outcome(root, scheduler.resume(root, job.resume_of, control=control))
        if not (job.selection or job.partition or job.start):  # a resume job as asked for has none of these
            raise StateError(f"the lake records no run `{job.resume_of}`",
                             hint="a worker that stopped before the run started leaves no run: enqueue it again")
        # a run job handed back before its run reached the run log: run it afresh, under the same id
    from lakewrap.runsteps import RunOptions

    opts = RunOptions(selectors=job.selection, partition=job.partition, start=job.start, end=job.end)
    return _outcome(root, scheduler.run(root, opts, run_id=run_id, control=control))


def open_lake(root: Path) -> None:
    """Connect to the lake once (creating it when it is new), then close it again."""
    from lakewrap.config import load_config
    from lakewrap.substrates.registry import resolve

    config = load_config(root)
    lake = resolve(config.lake).open(root, config=config)
    lake.close(lake.connect())


def recorded_status(root: Path, run_id: str) -> str | None:
    """The run log's status of ``run_id`` (None: no such run, or no lake yet)."""
    from lakewrap.config import load_config
    from lakewrap.runlog import read_run
    from lakewrap.substrates.registry import resolve

    config = load_config(root)
    substrate = resolve(config.lake)
    try:
        substrate.open(root, config=config, read_only=True).check_exists()
    except LakewrapError:
        return None
    lake = substrate.open(root, config=config)
    con = lake.connect()
    try:
        row = read_run(substrate.runlog(lake, con), run_id)
    finally:
        lake.close(con)
    return str(row["status"]) if row else None


def _outcome(root: Path, report: Any) -> Outcome:
    status = report.final_status()
    if status == "success":
        return Outcome("succeeded", report.run_id)
    failed = [r for r in report.results if r.status == "failed"]
    counts = report.counts()
    parts = [f"{counts['failed']} failed, {counts['skipped']} skipped, {counts['cancelled']} cancelled"]
    if failed:
        r = failed[0]
        parts.append(f"{r.target}" + (f" {r.partition}" if r.partition else "") + f": {r.error or 'failed'}")
    return Outcome("cancelled" if status == "cancelled" else "failed", report.run_id,
                   redact("; ".join(parts), roots=[root]))


def _error_text(root: Path, exc: BaseException) -> str:
    if isinstance(exc, LakewrapError):
        text = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
    else:
        text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return redact(text, roots=[root])


def supervise(argv: list[str], concurrency: int, say: Say) -> int:
    """``--concurrency N``: N worker processes (``argv`` each), SIGTERM/SIGINT passed on to them;
    the highest exit code of theirs."""
    children = [subprocess.Popen(argv) for _ in range(concurrency)]
    say(f"{concurrency} worker processes: " + ", ".join(str(c.pid) for c in children))

    def forward() -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    restore = on_signals(forward)
    try:
        codes = [child.wait() for child in children]
    finally:
        restore()
    return max(codes)


def child_argv(project: Path, opts: WorkerOptions) -> list[str]:
    argv = [sys.executable, "-m", "lakewrap", "worker", "--project", str(project), "--heartbeat", str(opts.heartbeat),
            "--reclaim-after", str(opts.reclaim_after), "--grace", str(opts.grace),
            "--max-attempts", str(opts.max_attempts)]
    return argv + (["--once"] if opts.once else [])

