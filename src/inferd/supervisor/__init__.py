"""Several protocol processes behind one ``inferd start`` (``protocol_processes``)."""
