"""Running a campaign: turning what the ReFrame suite wrote into the raw campaign layout."""
