"""The service's tables, apart from the evidence: the profile and snapshot registry (``registry``), API
tokens (``tokens``) and the probe queue the servers and node agents share (``probe_queue``); their ORM
classes are ``service.models``.

Like every store module, their functions take the caller's session and never commit.
"""
