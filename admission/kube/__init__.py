"""The Kubernetes side: API client, gate reflector, controller, leader election, Events,
Flux object access, certificate Secrets and webhook configurations.

May import core, store, observability and pki; never webhook or cli.
"""
