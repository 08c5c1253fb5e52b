"""Reading a tidy table (``table.csv``, ``curves.csv``) written by any version of the suite.

Tables from before record schema 2 name the system under test ``baseline``; they are read with
today's column names, so a results folder made by an older checkout still plots and reports
(the workflow does not rebuild a table whose command did not change)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

RENAMED = {"baseline": "system"}  # old column -> today's


def read_table(path: str | Path) -> pd.DataFrame:
    table = pd.read_csv(path)
    old = {k: v for k, v in RENAMED.items() if k in table and v not in table}
    return table.rename(columns=old)
