"""skuferry: keep a CMS product catalog in step with an ERP/PIM source."""

__version__ = "0.2.0"
