"""The report: the analyzer's result as the document a CFO reads.

sections/ builds ordered, typed sections (model.py) from an `AnalysisResult`, its charts as data (ChartSpec);
charts.py draws them as static SVG with matplotlib, in a worker beside the analysis when chartpool.py runs
one; render.py renders HTML and Markdown with the jinja2 templates in templates/;
writer.py writes report.html / report.md + charts/ / report.json atomically; terminal.py prints the
summary; chargeback.py writes the chargeback / showback CSV and JSON files. The `report` and `demo` flows
are gpuaudit/flows.py. Importing this package is cheap (no matplotlib, polars or jinja2 until a function
needs them) and never imports typer or pynvml.
"""
