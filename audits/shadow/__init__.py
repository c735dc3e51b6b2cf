"""What a candidate configuration would have done: shadow analysis of new audits, replay
of stored ones, the comparison with the active results and promotion on that evidence.

Shadow work never touches an audit's own rows, surfacing, alerts or collision digests:
its results are `ShadowResult` rows, and it runs after the audit's own work, yielding to
audits that wait (`analysis`).
"""
