"""How long a callable is timed (``TimingPolicy``): torch-free, so that a config, and the workflow
that plans from it, can be read without torch. ``suite.measure.timing`` measures under it."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TimingPolicy:
    warmup: int = 2
    min_repeats: int = 5
    min_time_s: float = 1.0
    max_repeats: int = 1000  # bound for very fast calls

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(f"invalid timing policy {self}: need warmup >= 0, "
                             "1 <= min_repeats <= max_repeats")
        if self.min_time_s < 0:
            raise ValueError(f"min_time_s must be >= 0, got {self.min_time_s}")

    def as_dict(self) -> dict:
        return asdict(self)
