/* replaced by the harness support code */
int pglock_test_support_placeholder(void);
int pglock_test_support_placeholder(void) { return 0; }
