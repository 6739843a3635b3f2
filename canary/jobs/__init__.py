"""Jobs over the evidence cache: ``warm`` (nightly probing of likely pairs), ``revalidate``
(after a driver upgrade), ``history`` (warming from the service's request log). Recovery of orphaned
probes (``canary recover``) lives in ``canary.admission.recovery``: every probe start runs it too."""
