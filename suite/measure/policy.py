"""How long a callable is timed (``TimingPolicy``): torch-free, so that a config, and the workflow
that plans from it, can be read without torch. ``suite.measure.timing`` measures under it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# When calls are also timed back to back (many between two events): "auto" on CUDA only, where a
# call returns with its kernels queued; a CPU call is done when it returns, so there the two
# figures agree and the extra rounds would cost time for nothing.
BACK_TO_BACK = ("auto", "always", "never")


@dataclass(frozen=True)
class TimingPolicy:
    warmup: int = 2
    min_repeats: int = 5
    min_time_s: float = 1.0
    max_repeats: int = 1000  # bound for very fast calls
    back_to_back: str = "auto"

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(f"invalid timing policy {self}: need warmup >= 0, "
                             "1 <= min_repeats <= max_repeats")
        if self.min_time_s < 0:
            raise ValueError(f"min_time_s must be >= 0, got {self.min_time_s}")
        if self.back_to_back not in BACK_TO_BACK:
            raise ValueError(f"back_to_back={self.back_to_back!r} is not one of {BACK_TO_BACK}")

    def times_back_to_back(self, device_type: str) -> bool:
        return self.back_to_back == "always" or (self.back_to_back == "auto"
                                                 and device_type == "cuda")

    def as_dict(self) -> dict:
        return asdict(self)
