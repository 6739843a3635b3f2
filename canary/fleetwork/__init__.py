"""What the admission service and the node agent both do against the store, so that neither imports
the other: run queued probes (``runner``: claim, run, renew the lease, finish, recover the dead's) and
read the devices node agents publish (``published``: a stale snapshot reads as unknown).

``canary.serve`` and ``canary.agent`` import this package; it imports the core (``canary.admission``,
the models, ``canary.backends``) and the store, never either of them (tests/test_layering.py).
"""
