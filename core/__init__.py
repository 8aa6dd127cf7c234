"""The log and what the other parts need from it: events, the store, blobs, subscriptions,
specimens, scoring and archives."""
