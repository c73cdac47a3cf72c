"""Reports from summary.json files: report.html per run and per sweep, comparisons, the gate.

Entry points: `reports.render.render_run` / `render_sweep`, `reports.compare.render_comparison`,
`reports.gate` (rules, JUnit XML, Markdown) and `reports.cli` (`bench report|compare|gate`).
"""
