import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '.data/**'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The planning core is pure: no database, no Kubernetes client, no HTTP, no clock.
    files: ['src/core/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: ['pg', '@kubernetes/*', 'express', '@grpc/*', '../db/*', '../controller/*'] }],
      'no-restricted-properties': ['error', { object: 'Date', property: 'now', message: 'Pass the clock in.' }],
    },
  },
);
