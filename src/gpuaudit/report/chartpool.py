"""Chart workers: processes that draw chart specs beside the analysis and beside each other.

A report draws every chart twice (the wide one and the phone's), about 20 matplotlib drawings, and importing
matplotlib's figure machinery takes about half a second: together most of a small report's time. A pool is
one worker process started before the analysis: it imports matplotlib while the analysis runs, then reads the
jobs (pickled specs: plain frozen data), forks a sibling per further drawer (the import is paid once; the
worker is single-threaded, so forking it is safe), draws its share and sends the SVG documents back. Anything
the pool does not deliver (it could not start, died, or a drawing raised) is drawn in this process, so the
charts and any error are the same as without a pool. With `cache`, a chart drawn before from the same spec is
read from the chart cache (report/chartcache.py) and only the others are sent; when none is left the worker is
stopped unused.

    python -m gpuaudit.report.chartpool N   # a worker with N drawers: jobs on stdin, SVGs on stdout
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from gpuaudit.report.model import ChartSpec

Job = tuple[ChartSpec, bool]  # the spec, and whether to draw it for a phone's width

# A worker that has not answered in this long is given up (its jobs are drawn here): a drawing takes well under
# a second, so only a stuck process comes near it.
_REPLY_TIMEOUT_S = 120.0


def default_drawers() -> int:
    """Two drawers where there are two cores or more; none on one core (they would only take turns with the
    analysis)."""
    return 2 if (os.cpu_count() or 1) >= 2 else 0


class ChartPool:
    """`drawers` processes drawing charts, the first started now; `draw(jobs)` once, then `close()` (or use it as
    a context). 0 drawers: this process draws."""

    def __init__(self, drawers: int | None = None, *, cache: bool = False) -> None:
        n = default_drawers() if drawers is None else drawers
        self._proc: subprocess.Popen[bytes] | None = None
        self._cache = cache  # report/chartcache.py: a chart drawn before from the same spec is read, not drawn
        if n < 1:
            return
        src = str(Path(__file__).resolve().parents[2])  # the gpuaudit this process runs, wherever it came from
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
            # single-threaded, so that forking it is safe; drawing needs no threads
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "gpuaudit.report.chartpool", str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError:  # no process to spare: this process draws
            self._proc = None

    @property
    def started(self) -> bool:
        return self._proc is not None

    def draw(self, jobs: Sequence[Job]) -> list[str]:
        """The SVG of each job, in order: from the chart cache where it holds the job (with `cache`), else drawn by
        the workers, else here."""
        from gpuaudit.report import chartcache
        from gpuaudit.report.charts import draw

        keys, svgs = chartcache.load(jobs) if self._cache else (None, [None] * len(jobs))
        todo = [i for i, svg in enumerate(svgs) if svg is None]
        missing = [jobs[i] for i in todo]
        results: list[str | None] = [None] * len(missing)
        proc, self._proc = self._proc, None
        if proc is not None and not missing:
            _stop(proc)  # every chart came from the cache
        elif proc is not None and proc.stdin is not None:
            stdin, proc.stdin = proc.stdin, None  # closed here: `communicate` must not flush it
            try:
                stdin.write(pickle.dumps(missing, protocol=pickle.HIGHEST_PROTOCOL))
                stdin.close()
            except OSError:  # the worker is gone: everything is drawn here
                _stop(proc)
            else:
                results = _reply(proc, len(missing))
        new = [
            svg if svg is not None else draw(spec, narrow=narrow)
            for svg, (spec, narrow) in zip(results, missing, strict=True)
        ]
        if keys is not None:
            chartcache.save([(keys[i], svg) for i, svg in zip(todo, new, strict=True)])
        fresh = iter(new)
        return [svg if svg is not None else next(fresh) for svg in svgs]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)

    def __enter__(self) -> ChartPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a worker that has nothing (more) to draw: it holds no state, so it is killed, not waited for (an
    analysis that failed must not wait for matplotlib's import to finish)."""
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _reply(proc: subprocess.Popen[bytes], n: int) -> list[str | None]:
    """The worker's SVGs (None where it delivered none)."""
    try:
        out, _ = proc.communicate(timeout=_REPLY_TIMEOUT_S)
        svgs = pickle.loads(out) if proc.returncode == 0 else None
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        svgs = None
    except (OSError, pickle.UnpicklingError, EOFError, ValueError):
        svgs = None
    if not isinstance(svgs, list) or len(svgs) != n:
        return [None] * n
    return [s if isinstance(s, str) else None for s in svgs]


def _draw_all(jobs: Sequence[Job]) -> list[str | None]:
    from gpuaudit.report.charts import draw

    svgs: list[str | None] = []
    for spec, narrow in jobs:
        try:
            svgs.append(draw(spec, narrow=narrow))
        except Exception:  # drawn again by the parent, which reports the error as it would without a pool
            svgs.append(None)
    return svgs


def _worker(drawers: int) -> int:
    from gpuaudit.report.charts import warm

    warm()  # while the parent still analyzes
    data = sys.stdin.buffer.read()
    if not data:  # closed without jobs: the report needed no charts, or stopped
        return 0
    jobs: list[Job] = pickle.loads(data)  # from the parent process that started this one
    # Every n-th job to each drawer: a chart's wide and phone drawings go to different drawers, so the shares
    # cost about the same.
    n = max(1, min(drawers, len(jobs))) if hasattr(os, "fork") else 1
    siblings = []
    for k in range(1, n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a sibling: draw share k, hand it over, and leave without running any cleanup
            os.close(r)
            try:
                with os.fdopen(w, "wb") as out:
                    pickle.dump(_draw_all(jobs[k::n]), out, protocol=pickle.HIGHEST_PROTOCOL)
            finally:
                os._exit(0)
        os.close(w)
        siblings.append((k, pid, r))
    svgs: list[str | None] = [None] * len(jobs)
    svgs[0::n] = _draw_all(jobs[0::n])
    for k, pid, r in siblings:
        with os.fdopen(r, "rb") as inp:
            try:
                share = pickle.load(inp)
            except (EOFError, pickle.UnpicklingError):  # the sibling died: the parent draws its share
                share = [None] * len(jobs[k::n])
        os.waitpid(pid, 0)
        svgs[k::n] = share
    sys.stdout.buffer.write(pickle.dumps(svgs, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_worker(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
