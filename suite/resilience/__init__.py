"""MegaScale's stability half (Sec. 4): training that survives failures and stragglers,
measured on the suite's real engines and a real supervisor (torchrun's elastic agent).

- ``store``: atomic, resumable checkpoints through ``torch.distributed.checkpoint``, written
  synchronously or in two stages (a snapshot in host memory, persisted in the background);
- ``worker``: the training loop every rank runs under the supervisor (resume, checkpoint, a
  declared fault, the per-rank step monitor), writing an event log;
- ``supervise``: launches it under ``torchrun --max-restarts`` and turns the event log and the
  launcher's output into measured times (detect, restart, lost work);
- ``monitor``: the per-rank compute timer and the straggler finder;
- ``ettr``: Young's and Daly's checkpoint interval and the effective training time ratio.
"""
