"""``torchrun``, with every stop of a failed group honouring the configured shutdown timeout.

When a worker fails, torchrun's agent stops the rest of the group (SIGTERM, then SIGKILL after
a grace) before it starts the next attempt. torch 2.13 reads that grace from
``--shutdown-timeout`` / ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` only on the agent's own exit; the
two stops on the restart path use a fixed 30 s: the process context closes the survivors as
soon as it sees a failure (``PContext._poll`` -> ``close()``, before the agent logs "failed
(exitcode ...)"), and ``LocalElasticAgent._stop_workers`` calls ``_shutdown()`` with its default
(pytorch/pytorch#192815, open). A hung rank (stopped, or stuck in the kernel) never acts on
SIGTERM, so every hang cost the whole 30 s. Every stop ends in ``PContext.close``; this entry
point makes it use the configured value whatever its caller passed (older torch passes none),
then runs torchrun unchanged: ``python -m suite.resilience.elastic ARGS`` takes torchrun's
arguments.
"""

from __future__ import annotations

import os

ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"  # torchrun's own variable
DEFAULT_S = 30  # torchrun's default


def shutdown_timeout() -> int:
    return int(os.environ.get(ENV, DEFAULT_S))


def main() -> None:
    from torch.distributed.elastic.multiprocessing.api import PContext
    from torch.distributed.run import main as torchrun

    close = PContext.close

    def close_with_grace(self, death_sig=None, timeout=None):
        close(self, death_sig, shutdown_timeout())

    PContext.close = close_with_grace
    torchrun()


if __name__ == "__main__":
    main()
