"""iCalendar feeds that GateKeepers follow (``spec.calendars``): fetched over HTTPS with bounds
and no SSRF (``fetch``), parsed and expanded (recurrences, time zones) into the coming
intervals of their events in a child process with CPU, memory and time limits (``parse``).
The controller does this (admission.kube.calendarsync), never a review.

May import core, observability, pki and clock; never store, webhook, kube or cli.
"""
