"""The JMESPath functions, lookup tables and number forms every stage's paths may use."""
