"""Plant each deliberate bug that a review found the core tests blind to, and check a core test fails.

Run from the repository root: ``.venv/bin/python tools/mutation/deliberate_bugs.py`` (``make mutation``
runs it before mutmut). Each mutation is applied to the working tree, the core tests run, and the
file is restored; exit code 1 when any mutation survives.
"""
import pathlib
import subprocess
import sys

muts = [
 ("iadeep/sim/_engine.py", "norm = [self._norm_of(a, b), self._norm_of(b, a)]", "norm = [1.0, 1.0]", "ignore interference"),
 ("iadeep/sim/_engine.py", "return min([rate(g, slots[g].index(h)) for g in gs])", "return max([rate(g, slots[g].index(h)) for g in gs])", "gang at fastest GPU"),
 ("iadeep/policy/_base.py", "reason[~(view.gpu_mem_total_gib - view.gpu_mem_used_gib >= job.mem_gib - 1e-9)] = _MEM", "reason[~(view.gpu_mem_total_gib >= job.mem_gib - 1e-9)] = _MEM", "ignore used memory"),
 ("iadeep/policy/_base.py", "reason[~(view.gpu_mem_total_gib - view.gpu_mem_used_gib >= job.mem_gib - 1e-9)] = _MEM", "reason[~(view.gpu_mem_total_gib - view.gpu_mem_used_gib > job.mem_gib)] = _MEM", "refuse exact fit"),
 ("iadeep/sim/_engine.py", "            del row[s]\n            row.append(-1)\n", "            row[s] = -1\n", "slot left empty (old engine)"),
 ("iadeep/policy/_undo.py", "return Undo(occupants[-1],", "return Undo(occupants[0],", "undo evicts the oldest"),
 ("iadeep/sim/_engine.py", "self._push(self.now + decision.trials * self.settings.trial_s, _TUNED", "self._push(self.now, _TUNED", "tuning session free"),
 ("iadeep/sim/_engine.py", "self.work_left[h] += self.settings.restart_penalty_s", "pass", "no restart penalty"),
]
survived: list[str] = []
for path, old, new, what in muts:
    p = pathlib.Path(path); src = p.read_text()
    assert old in src, what
    p.write_text(src.replace(old, new, 1))
    try:
        r = subprocess.run([".venv/bin/python", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests/core/test_core_sim_closed_form.py", "tests/core/test_core_policies.py"], capture_output=True, text=True)
        last = r.stdout.strip().splitlines()[-1]
        survived.append(what) if r.returncode == 0 else None
        print(f"{what:32s} -> {'KILLED' if r.returncode else 'SURVIVED'}: {last}", flush=True)
    finally:
        p.write_text(src)
sys.exit(1 if survived else 0)
