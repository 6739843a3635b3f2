"""Jobs over the evidence cache: ``warm`` (nightly probing of likely pairs), ``revalidate``
(after a driver upgrade), ``recover`` (orphaned probes)."""
