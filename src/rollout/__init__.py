"""rollout: deploy the cuzk proving daemon to fleets of rented GPU hosts."""

__version__ = "0.1.0"
