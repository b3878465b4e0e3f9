"""Logs as JSON lines and Prometheus metrics, shared by the server and the controller.

May import the clock and core.
"""
