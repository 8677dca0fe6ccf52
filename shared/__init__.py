"""ragkb's common code: contracts, configuration, registry, server helper, clients, stores."""
