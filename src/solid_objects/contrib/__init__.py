"""Framework integrations: one module per framework, imported only by the application.

Nothing in the core imports this package, so the framework packages stay optional
extras (``solid-objects[fastapi]``, ``solid-objects[flask]``). ``problems`` is the
framework-neutral part: the table from library errors to HTTP problem details.
"""
