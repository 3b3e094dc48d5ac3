"""The dashboards' queries by subject (as kubernetes-mixin keeps dashboards/resources/queries/):
`selectors` (the variables' selectors and the PromQL combinators), `reads` (which layer of records
a panel reads), `acceptance`, `positions`, `load`, `health`. dashboards/promql.py joins the
subjects into the one `Queries` the dashboards use.
"""
