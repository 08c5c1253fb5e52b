"""The steps of ``seedbench gpu-check`` (``suite.gpu.pack``), in the order they run, each in the
room of what it measures. Each takes the ``Pack`` and returns what ``steps.json`` keeps of it
(``status`` when not ``ok``)."""

from __future__ import annotations

from suite.gpu.steps.bert import bert_grid, bert_grid_more, ladder, mha, serving, workflow
from suite.gpu.steps.llm import gpt, resilience, window_attention
from suite.gpu.steps.scale_probes import (
                                          activation_memory,
                                          attention_kernels,
                                          gemm_shapes,
                                          hbm_bandwidth,
                                          layer_intercept,
                                          overlap_interference,
)
from suite.gpu.steps.setup import env, kernels, peak, tune

# issue 50's steps first, right after what they run with (the tuning, the peak): the grid's
# systems the goals are judged on, serving, the grid's other systems, the user's path; a lease
# cut off keeps them. The kernel tests after them (every point above is gated against float64)
STEPS = (("env", env), ("tune", tune), ("peak", peak),
         ("bert_grid", bert_grid), ("serving", serving), ("bert_grid_more", bert_grid_more),
         ("workflow", workflow), ("kernels", kernels),
         ("mha", mha), ("gpt", gpt),
         ("window_attention", window_attention), ("resilience", resilience), ("ladder", ladder),
         ("attention_kernels", attention_kernels), ("hbm_bandwidth", hbm_bandwidth),
         ("gemm_shapes", gemm_shapes),
         ("overlap_interference", overlap_interference), ("layer_intercept", layer_intercept),
         ("activation_memory", activation_memory))
