"""The model host: one process that runs, once for the whole server, the models no
protocol process may copy, and serves them to every protocol process
(docs/design.md "The model host"). Its parts, each in its own module:

- ``placement.py`` — which models run in the host: the rules, from a model's
  settings and the server's, and the server's layout they decide at start;
- ``on_demand.py`` — the host started when a load first needs it, and the
  placement of each load after the start (the coordinator's);
- ``process.py`` — the host process: its server (``ModelHostServer``), how it is
  made from its role, and the supervisor's keeper of it (``HostKeeper``: started
  with the server or for a load, forked from the protocol fork parent when one runs,
  kept running);
- ``edge.py`` and ``streams.py`` — the host's side of the protocol processes'
  connections on ``host.sock`` (and of a protocol process's model calls socket);
- ``client.py`` — a protocol process's client of ``host.sock`` (a worker's client
  of its server's model calls too);
- ``backend.py`` — the registry backend of a hosted model in a protocol process.

Each module sits at the layer of what it imports (tests/unit/test_architecture.py):
``client`` with the workers, ``backend`` with the serving core, ``edge`` and
``streams`` with the server, ``placement``, ``on_demand`` and ``process`` with the
supervisor.
"""
