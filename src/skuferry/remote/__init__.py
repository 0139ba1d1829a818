"""The CMS API: client, retry policy, rate budgets."""
