"""Tests of the connector stand-ins (skuferry.sandbox.pims)."""
