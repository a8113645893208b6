"""Site profiles: plain TOML data validated by one schema (:mod:`hpkctl.sites.schema`).

- :mod:`~hpkctl.sites.files`: which files make up a profile (built-in, user, ``extends``), reading them;
- :mod:`~hpkctl.sites.provenance`: merging them key by key, remembering which file set each value;
- :mod:`~hpkctl.sites.validation`: schema errors as messages that name file, key and fix;
- :mod:`~hpkctl.sites.expansion`: ``$VAR``/``~`` in path-like values;
- :mod:`~hpkctl.sites.loader`: the entry points below (``load_site``, ``explain_site``, ...);
- :mod:`~hpkctl.sites.selection`: which profile to use without ``--site`` (``$HPK_SITE``, config, host name);
- :mod:`~hpkctl.sites.describe`: the text of ``hpkctl sites list|show`` and ``_defaults.toml``;
- :mod:`~hpkctl.sites.tomltext`: values written as TOML in messages.
"""

from hpkctl.sites.expansion import PATH_KEYS, expand_value
from hpkctl.sites.files import default_user_dir
from hpkctl.sites.loader import (
    SCHEMA_DEFAULT,
    SiteExplanation,
    SiteSource,
    explain_site,
    list_sites,
    load_site,
    require_submittable,
)
from hpkctl.sites.schema import SiteProfile
from hpkctl.sites.selection import SiteChoice, select_site

__all__ = [
    "PATH_KEYS",
    "SCHEMA_DEFAULT",
    "SiteChoice",
    "SiteExplanation",
    "SiteProfile",
    "SiteSource",
    "default_user_dir",
    "expand_value",
    "explain_site",
    "list_sites",
    "load_site",
    "require_submittable",
    "select_site",
]
