"""Planner passes: pure functions from model facts and measurements to placement decisions."""
