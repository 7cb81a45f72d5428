//! dvm linker (filled in by the firmware/linker issue).
