"""The GPU half of the suite in one short lease: the pack (``pack``) and its steps (``steps``)."""
