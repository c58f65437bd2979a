"""Reports of experiments: comparison tables, memory budget, diagnosis, plots, HTML.

Public API: `build_report(DIR)` -> `Report` (tables, diagnoses, plots; `to_markdown`,
`to_html`), `write_report(DIR, report)`. See docs/report.md.
"""

from servelab.report.build import Report, build_report, write_report

__all__ = ["Report", "build_report", "write_report"]
