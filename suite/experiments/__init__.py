"""Experiment families: each turns (config section, system, workload point) into a record.

``registry`` describes every experiment once (title, family, figure, analysis, report text,
paper inputs); the runners (``bert_varlen``, ``bert_kernels``, ``llm_train``, ``vwn_width``,
``pma_merging``) and planners (``plan``, ``llm_plan``, ``pretrain_plan``) live beside it.

``subject`` is what a point is about besides its sweep: the model family for end-to-end
experiments, the operator for kernel micro-benchmarks.
"""
