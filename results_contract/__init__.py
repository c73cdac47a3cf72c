"""The results contract: what the harness writes and what Spark and the reports read.

Writer (`harness`) and readers (`spark_analysis`, `reports`) import the names from here, so a
column or a metric is spelled once; docs/results.md describes the same contract in prose.
"""
