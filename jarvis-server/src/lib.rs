//! The Jarvis reference web server.
