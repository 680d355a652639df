"""Small applications that the tests run in real worker and caller processes."""
