"""Site profiles: plain TOML data validated by one schema (:mod:`hpkctl.sites.schema`).

Loading, merging (built-in ← user file, key by key), ``$VAR``/``~`` expansion and provenance live in
:mod:`hpkctl.sites.loader`; ``hpkctl sites list|show`` in :mod:`hpkctl.sites.commands`.
"""

from hpkctl.sites.loader import (
    SCHEMA_DEFAULT,
    SiteExplanation,
    SiteSource,
    default_user_dir,
    explain_site,
    list_sites,
    load_site,
    require_submittable,
)
from hpkctl.sites.schema import SiteProfile

__all__ = [
    "SCHEMA_DEFAULT",
    "SiteExplanation",
    "SiteProfile",
    "SiteSource",
    "default_user_dir",
    "explain_site",
    "list_sites",
    "load_site",
    "require_submittable",
]
