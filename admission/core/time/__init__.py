"""Time: cron expressions, time zones, schedule entries, GateKeeper calendars and when they are fetched.

May import admission.core.base; nothing of flux, gates or admission.
"""
