"""The simulator's tuning sessions: the policy's ``tune`` call after a GPU's co-location set
changes, its trials, and what applies when the session ends (new batch sizes, or the undo).

A session with ``n`` trials lasts ``n x trial_s``; meanwhile the jobs progress at the mean true
rate of the configurations measured. At its end the chosen configuration applies (the reservations
follow it), or the policy's undo does (the pair of types banned, the newest job re-queued), as the
live coordinator applies them. A session interrupted by another change of the GPU is discarded.
Measurements the policy sees carry log-normal noise (``SimSettings.measurement_noise``); the
simulator's rates use the true values.

:class:`TuningSessions` is a part of :class:`iadeep.sim.Simulator` (a base class of it), over the
engine's state and its helpers (``view``, ``_push``, ``_sync``, ``_evict``, ``_reserved``,
``_refresh_gpu``, ``_type_changed``).
"""

from __future__ import annotations

from dataclasses import dataclass

from iadeep.goodput import progress

__all__ = ["Session", "TuningSessions", "TUNED"]

#: The event kind of a session's end in the engine's event heap.
TUNED = 2


@dataclass
class Session:
    version: int
    config: dict[int, int]
    evict: tuple[int, ...] = ()
    avoid: tuple[int, ...] = ()  # job types the policy bans from sharing once the session ends


class TuningSessions:
    """Tuning calls and sessions of the simulated coordinator (module docstring)."""

    def _measure_on(self, g: int, trial_rates: list[dict[int, float]]):
        def measure(config):
            handles = list(config)
            types = [int(config[x]) for x in handles]
            norm = self._normalised(handles, types)
            gain, base, speed = self._gain_of, self._base_of, self._speed_of  # _true_rate, inlined (a few per trial)
            trial_rates.append({x: progress(n, gain(t, base[x])) * speed(g, t) for x, t, n in zip(handles, types, norm)})
            # one draw per job in handle order (a sized draw is the same stream as single draws, so
            # the draws are taken from a batch drawn ahead: the same values in the same order)
            noisy = self._lognormal(len(handles))
            return {x: n * e for x, n, e in zip(handles, norm, noisy)}

        return measure

    def _lognormal(self, k: int) -> list[float]:
        """The next ``k`` values of ``self.rng.lognormal(0.0, settings.measurement_noise)``, drawn
        1,024 at a time (the only draws from ``rng``)."""
        if self._noise_at + k > len(self._noise):
            self._noise = self._noise[self._noise_at:] + self.rng.lognormal(0.0, self._noise_sigma, size=1024).tolist()
            self._noise_at = 0
        out = self._noise[self._noise_at:self._noise_at + k]
        self._noise_at += k
        return out

    def _tune(self, g: int, affected: set[int]) -> None:
        if not self.settings.tuning:  # a driver without a tuner (the live system before the coordinator)
            return
        trial_rates: list[dict[int, float]] = []
        self.calls["tune"] += 1
        decision = self.policy.tune(g, self.view(), self._measure_on(g, trial_rates))
        if decision is None:
            return
        evict = tuple(int(h) for h in decision.evict)
        if decision.trials and trial_rates:
            # the session's trials run on the GPU: the jobs progress at the mean true rate of the
            # measured configurations until it ends; then its decision (new sizes or an undo) applies
            for h in self._occupants(g):
                self.trials[h] += decision.trials
            mean = {}
            for x in trial_rates[0]:  # the mean of each job's rates over the trials (sum, then divide: as np.mean)
                rates = [tr[x] for tr in trial_rates if x in tr]
                mean[x] = sum(rates) / len(rates)
            for x, r in mean.items():
                if x in self._occupants(g):
                    self.gpu_rate[g, self._slot(g, x)] = r
                    affected.add(x)
            if decision.type_ids or evict or decision.avoid:
                self.sessions[g] = Session(int(self.gpu_version[g]), {} if evict else dict(decision.type_ids), evict,
                                            tuple(decision.avoid))
                self._push(self.now + decision.trials * self.settings.trial_s, TUNED, g, int(self.gpu_version[g]))
        elif evict or decision.avoid:
            self._undo(evict, decision.avoid, affected, g)
        elif decision.type_ids:
            self._apply_config(g, dict(decision.type_ids), affected)

    def _apply_config(self, g: int, config: dict[int, int], affected: set[int]) -> None:
        self._epoch += 1
        occ = self._occupants(g)
        # the reservations follow the configuration (module docstring)
        new_mem = sum(self._reserved(h, config.get(h)) for h in occ)
        if new_mem > self.mem_total[g] + 1e-9:
            raise RuntimeError(f"policy {self.policy.name} chose a configuration over GPU {g}'s memory")
        for h in occ:
            if h in config:
                self._sync(h)
                changed = self.type[h] != config[h]
                self.type[h] = config[h]
                if changed:
                    self._type_changed(h)
        self.mem_used[g] = new_mem
        self._change_log.append(g)
        self._refresh_gpu(g, affected)

    def _undo(self, evict: tuple[int, ...], avoid: tuple[int, ...], affected: set[int], g: int = -1) -> None:
        """Apply a session's undo when the session ends (the live system's order: the coordinator
        records it at the end of the session, then the extender bans the pair and evicts the pod):
        the policy bans the types (:meth:`~iadeep.policy.Policy.avoid`), the jobs are re-queued,
        each unless the policy keeps it (:meth:`~iadeep.policy.Policy.keeps`, on the view now, as the
        extender asks before it evicts); the jobs of a GPU ``g`` whose job is kept leave the session's
        trial rates for their types' rates."""
        if avoid:
            self.policy.avoid(list(avoid))
        for h in evict:
            if not self.policy.keeps(h, avoid, self.view()):
                self._evict(h, affected)
            elif g >= 0:
                for x in self._occupants(g):
                    self._sync(x)
                self._epoch += 1
                self._refresh_gpu(g, affected)
