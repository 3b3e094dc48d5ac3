"""The alert-quality bench's parts (bench/alert_quality.py is the command): `scenarios`,
`simulation` (the counters a pod writes), `promtool` (rule sets, test files, timelines) and
`report` (figures and tables).

Imported with bench/ on sys.path (the bench is a script, not an installed package).
"""
