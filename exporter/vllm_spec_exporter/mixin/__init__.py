"""Generators for the monitoring artifacts (rules, alerts, runbooks, dashboards) from one config."""
