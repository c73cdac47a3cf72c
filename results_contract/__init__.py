"""The results contract: what the harness writes and what Spark and the reports read.

Writer (`harness`) and readers (`spark_analysis`, `reports`) import the names from here, so a
column or a metric is spelled once; docs/results.md describes the same contract in prose.

- `paths`: file and folder names under results/<run-id>/ and results/<sweep-id>/
- `columns`: the raw CSV files' columns, in header order, with what each holds
- `metrics`: metric names (histogram tags, summary keys) and the six stages
- `schemas`: the schema ids of summary.json and sweep-summary.json, and the summary's units
- `summary`: summary.json's keys, and the checks its readers apply (file and field named)
- `harness_cost`: CPU per delivery of the clients and the bundled broker (summary, broker stats)
- `hlog`: the histogram shape and the tagged interval log's writer and reader
- `clock`: the clock of every `*_us` value in raw results

This package imports nothing from the harness, the analysis or the reports.
"""
