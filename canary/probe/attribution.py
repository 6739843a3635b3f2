"""Was a slow or SLO-breaching on-window the candidate's doing? Pure: no IO, no clock.

The SLO rule and the slowdown guard end the candidate's load at once when one on-window breaches the
resident's SLO or is far slower than the resident's earlier windows. That protects the resident; it
is not yet evidence against the pair. A resident whose own p99 hovers at its SLO, or whose latency
swings with a period, breaches now and then with no candidate at all — and recording *unsafe* for
that refuses a safe pair.

So a breach is **attributed** before anything is recorded, by a test that runs over the whole probe
and may be looked at after every breach without losing its level (a test martingale, "betting"):

- Each rule has a threshold fixed *before* a pair is measured: the SLO (on window p99s), and the
  guard's bound over the slowest off-window of the earlier pairs and the baseline (on window means).
- Every pair whose two windows both have data is compared with that threshold. A pair where exactly
  one window is over it is **discordant**. Under the null — the candidate changes nothing, so the two
  windows of a pair are exchangeable (independent windows, or a stationary resident; the probe's
  random pair order) — the window over the threshold carries the candidate with probability ½ given
  everything before.
- The rule's **wealth** starts at 1 and, on each discordant pair, is multiplied by ``1 + BET`` when the
  window over the threshold is the one with the candidate and by ``1 − BET`` when it is the resident's
  own. Concordant pairs leave it alone. Under the null each factor has mean 1 given the past, so the
  wealth is a nonnegative martingale.
- The evidence is the mean wealth of the rules in force for the probe (fixed before it starts: the
  guard always, the SLO rule when there is an SLO, rollback on breach is on, and the resident is a
  latency resident). By Ville's inequality the chance that it *ever* reaches ``1/α`` under the null is
  at most α — however many times it is looked at, and whenever. A breach is attributed when the
  evidence, including the breaching pair, is at least ``1/α``.

What this costs: a single breach is never enough. With ``BET = 0.9`` and α = 5%, attributing needs
five to six pairs in which only the window with the candidate was over (``1.9⁵ ≈ 25``; one rule of two
in force needs ``1.9⁶ / 2 ≈ 24``), fewer if both rules see them; each pair in which only the
resident's own window was over divides the wealth by ten. A candidate that hurts the resident that
much is usually judged *unsafe* by the slowdown judge first. Where exchangeability fails — a resident
whose load surges for minutes in step with the schedule — the level is not guaranteed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

#: The fraction of its wealth a rule bets on each discordant pair (that the window over is the
#: candidate's). Fixed before any data: it is what keeps the wealth a martingale.
BET = 0.9

#: A breach that is not attributed ends the probe once some rule has seen more than this many pairs
#: over its threshold only with the candidate than only without it: the candidate may be hurting the
#: resident in a way the test cannot yet pin on it. At least six, or attributing could never happen.
MAX_EXCESS = 6

RuleName = Literal["slo", "guard"]


@dataclass(frozen=True, slots=True)
class ExceedanceTally:
    """One rule's pairs over its threshold and its wealth (see the module's docstring)."""

    rule: RuleName
    pairs: int = 0
    on_only: int = 0
    off_only: int = 0
    both: int = 0
    wealth: float = 1.0

    def add(self, *, on_over: bool, off_over: bool) -> ExceedanceTally:
        """The tally after one more pair whose two windows were compared with a threshold fixed before
        the pair was measured."""
        if on_over and off_over:
            return replace(self, pairs=self.pairs + 1, both=self.both + 1)
        if on_over:
            return replace(self, pairs=self.pairs + 1, on_only=self.on_only + 1, wealth=self.wealth * (1.0 + BET))
        if off_over:
            return replace(self, pairs=self.pairs + 1, off_only=self.off_only + 1, wealth=self.wealth * (1.0 - BET))
        return replace(self, pairs=self.pairs + 1)

    def describe(self) -> str:
        what = "the SLO" if self.rule == "slo" else "the guard's bound"
        return (f"{what}: {self.on_only} of {self.pairs} pairs over it only with the candidate, {self.off_only} only "
                f"without it, {self.both} both")


@dataclass(frozen=True, slots=True)
class Attribution:
    """The answer for one breach: ``evidence`` is the mean wealth of the rules in force."""

    attributed: bool
    evidence: float
    level: float
    tallies: tuple[ExceedanceTally, ...]

    def describe(self) -> str:
        verdict = "attributed to the candidate" if self.attributed else "not attributable to the candidate"
        rules = "; ".join(t.describe() for t in self.tallies)
        return (f"{verdict}: {rules} (evidence {self.evidence:.3g} against {1 / self.level:.3g} = 1/α; a test "
                f"martingale, level {self.level:.3g} over the whole probe)")


def attribute(tallies: Sequence[ExceedanceTally], *, level: float) -> Attribution:
    """Whether the breaches so far are the candidate's, at ``level`` over the whole probe.

    ``tallies``: one per rule in force for the probe — a set fixed before the probe started, not
    chosen after seeing which rule fired (that would spend the level twice)."""
    if not 0 < level < 1:
        raise ValueError("level must lie in (0, 1)")
    if not tallies:
        raise ValueError("no rule in force: nothing to attribute")
    evidence = sum(t.wealth for t in tallies) / len(tallies)
    return Attribution(attributed=evidence >= 1.0 / level, evidence=evidence, level=level, tallies=tuple(tallies))


def excess(tallies: Iterable[ExceedanceTally]) -> int:
    """The most, over the rules, of pairs over the threshold only with the candidate minus only without."""
    return max((t.on_only - t.off_only for t in tallies), default=0)
