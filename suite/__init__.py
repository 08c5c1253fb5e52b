"""seedbench: the harness. Knows how to measure; nothing about any one model's math."""
