"""Site profiles: plain TOML data validated by one schema (:mod:`hpkctl.sites.schema`)."""

from hpkctl.sites.schema import SiteProfile

__all__ = ["SiteProfile"]
