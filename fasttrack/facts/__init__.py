"""The facts stage: loaders read the disk, git and other processes into one immutable `Facts`
(`fasttrack.facts.model`), built by `fasttrack.facts.gather.gather_facts`; rules read only it."""
