"""Workcenter."""
