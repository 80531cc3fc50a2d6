"""``toolgym collect``: a collection run (``run``), its plan and resume (``plan``), the guards that
stop a failing run (``guard``), secret scrubbing (``redact``) and the Ray driver (``ray``)."""
