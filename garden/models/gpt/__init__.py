"""GPT (Radford et al., 2018): post-LN decoder, positions in the token table."""
